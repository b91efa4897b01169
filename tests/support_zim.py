"""ZIM archives made at test time with libzim's own writer (openZIM's ``libzim.writer``),
the format Kiwix publishes: HTML articles, media entries, redirects.

``make_zim(path, entries)`` writes one; ``ARTICLES`` are a few Wikipedia-like pages with
known words, ``video_entries`` two short videos ffmpeg makes (``support_media.make_video``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from libzim.writer import Creator, Hint, Item, StringProvider  # type: ignore[import-untyped]


class _Entry(Item):  # type: ignore[misc]
    def __init__(self, path: str, title: str, mimetype: str, content: bytes | str) -> None:
        super().__init__()
        self._path, self._title, self._mimetype = path, title, mimetype
        self._content = content.encode() if isinstance(content, str) else content

    def get_path(self) -> str:
        return self._path

    def get_title(self) -> str:
        return self._title

    def get_mimetype(self) -> str:
        return self._mimetype

    def get_contentprovider(self) -> StringProvider:
        return StringProvider(self._content)

    def get_hints(self) -> dict:
        return {Hint.FRONT_ARTICLE: self._mimetype == "text/html", Hint.COMPRESS: True}


def make_zim(
    path: Path,
    entries: Iterable[tuple[str, str, str, bytes | str]],
    redirects: Iterable[tuple[str, str, str]] = (),
) -> Path:
    """A ZIM archive at ``path`` of ``entries`` (path, title, MIME type, content) and
    ``redirects`` (path, title, target path); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with Creator(str(path)).config_indexing(False, "eng") as creator:
        for entry in entries:
            creator.add_item(_Entry(*entry))
        for source, title, target in redirects:
            creator.add_redirection(source, title, target, {})
        creator.add_metadata("Title", "airig test archive")
        creator.add_metadata("Language", "eng")
    return path


def article(title: str, *paragraphs: str) -> str:
    """An article as Kiwix's scrapers write one: a head with a style and a script that are
    no text, a heading, paragraphs, a list."""
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + title + "</title>"
        "<style>body{color:red}</style><script>var hidden = 'script words';</script></head>"
        f"<body><h1>{title}</h1>{body}<ul><li>first point</li><li>second point</li></ul>"
        "</body></html>"
    )


ARTICLES = [
    ("Volcano", "Volcano", "text/html",
     article("Volcano", "A volcano is a rupture in the crust where magma erupts as lava.",
             "Basalt lava flows are fluid; rhyolite builds steep domes.")),
    ("Glacier", "Glacier", "text/html",
     article("Glacier", "A glacier is a persistent body of dense ice moving under its own "
             "weight.", "Moraines mark where the ice once reached.")),
    ("Water_purification", "Water purification", "text/html",
     article("Water purification", "Boiling water for one minute kills most pathogens.",
             "Sand filters and chlorine tablets make river water drinkable.")),
]  # fmt: skip


def video_entries(tmp: Path) -> list[tuple[str, str, str, bytes]]:
    """Two short talks as MP4 entries of a TED-like archive (ffmpeg makes them, small:
    real streams Whisper's stand-in and ffmpeg's scene filter read)."""
    from support_media import make_video

    out = []
    talks = ((1, "How glaciers move", "160x120"), (2, "Clean water anywhere", "176x144"))
    for number, title, size in talks:  # two sizes: two contents, two hashes
        video = make_video(tmp / f"talk{number}.mp4", size=size)
        out.append((f"videos/talk{number}.mp4", title, "video/mp4", video.read_bytes()))
    return out
