"""Which audio and video files ffmpeg (and the Whisper server) may read: plain containers
only, told by their first bytes, never by their name or by ffmpeg's probing.

ffmpeg picks a demuxer by probing a file's content, and some demuxers read other files:
an HLS playlist named ``talk.mp4`` (``#EXTM3U`` and a segment line naming
``/elsewhere/secret.ts`` or a URL) made ffmpeg read a file outside the data volume, and a
concat list, a DASH manifest or an image sequence pattern can do the same. So a file is
read only when its first bytes are one of the plain containers below, and ffmpeg / ffprobe
are then told that demuxer (``-f``), the ``file`` protocol alone
(``-protocol_whitelist file``) and the path as a ``file:`` URL: nothing else decides how
it is read. QuickTime's data references to other files stay off (``-enable_drefs 0``,
the mov demuxer's default, said here so no default can change it).
"""

from __future__ import annotations

from pathlib import Path

from airig.executors.context import TaskError

# The plain containers, each with ffmpeg's demuxer for it (ffmpeg -demuxers).
PLAIN_TYPES = "an mp4, mov, m4a, mkv, webm, avi, mpeg, MPEG-TS, mp3, aac, wav, flac or ogg file"
HEAD_BYTES = 512
# ISO base media (mp4, m4a, mov, 3gp): a box type at bytes 4..8 (ISO/IEC 14496-12; old
# QuickTime files start with moov, mdat, wide, free, skip or pnot instead of ftyp)
_ISO_BOXES = (b"ftyp", b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot")
TS_PACKET = 188
# What a refused file looks like, for the message (checked in order on its first bytes).
_LOOKS_LIKE = (
    (b"#EXTM3U", "an HLS/M3U playlist"),
    (b"ffconcat", "an ffconcat list"),
    (b"<?xml", "an XML file (a DASH manifest?)"),
    (b"<MPD", "a DASH manifest"),
    (b"[playlist]", "a PLS playlist"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"%PDF", "a PDF"),
)


def plain_container(path: Path, relative: str, what: str) -> str:
    """ffmpeg's demuxer for the file at ``path``, or a ``bad_input`` naming what it is."""
    with path.open("rb") as handle:
        head = handle.read(HEAD_BYTES)
        demuxer = demuxer_of(head)
        if demuxer == "id3":  # an ID3 tag first: the audio after it decides
            size = _id3_size(head)
            handle.seek(size)
            demuxer = demuxer_of(handle.read(HEAD_BYTES)) or "mp3"
            demuxer = demuxer if demuxer in ("mp3", "aac", "flac") else "mp3"
    if demuxer is None:
        raise TaskError(
            f"{what} {relative!r} is {_looks_like(head)}, not a plain audio or video file",
            error_type="bad_input",
            retryable=False,
            hint=f"give {PLAIN_TYPES}: playlists and lists of other files are not read",
        )
    return demuxer


def demuxer_of(head: bytes) -> str | None:
    """The demuxer of a plain container by its first bytes; "id3" for an ID3 tag (what
    follows it decides); None for anything else."""
    if head[4:8] in _ISO_BOXES:
        return "mov"
    if head[:4] == b"\x1a\x45\xdf\xa3":  # EBML: Matroska and WebM
        return "matroska"
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3":
        return "id3"
    if head[:4] == b"\x00\x00\x01\xba":  # an MPEG program stream's pack header
        return "mpeg"
    if _transport_stream(head):
        return "mpegts"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:  # MPEG audio sync
        return "aac" if head[1] & 0x06 == 0 else "mp3"  # layer 0: ADTS
    return None


def _transport_stream(head: bytes) -> bool:
    """MPEG-TS (188-byte packets) or M2TS (a 4-byte timecode before each): a sync byte
    0x47 at the start of every packet the head holds, two at least."""
    for start, step in ((0, TS_PACKET), (4, TS_PACKET + 4)):
        syncs = range(start, len(head), step)
        if len(syncs) >= 2 and all(head[at] == 0x47 for at in syncs):
            return True
    return False


def _id3_size(head: bytes) -> int:
    """Bytes of an ID3v2 tag, its 10-byte header (and footer) included."""
    if len(head) < 10:
        return len(head)
    size = 0
    for byte in head[6:10]:  # "syncsafe": 7 bits a byte
        size = size << 7 | byte & 0x7F
    return 10 + size + (10 if head[5] & 0x10 else 0)


def _looks_like(head: bytes) -> str:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    for magic, name in _LOOKS_LIKE:
        if text.startswith(magic):
            return name
    if not head:
        return "empty"
    if all(byte in b"\t\r\n" or 32 <= byte < 127 for byte in head[:64]):
        return "text"
    return "of an unknown format"


def ffmpeg_input(path: Path, demuxer: str) -> list[str]:
    """ffmpeg's / ffprobe's input options for a plain container: its demuxer, the file
    protocol alone, the path as a file: URL."""
    options = ["-protocol_whitelist", "file", "-f", demuxer]
    if demuxer == "mov":
        options += ["-enable_drefs", "0"]
    return [*options, "-i", f"file:{path}"]
