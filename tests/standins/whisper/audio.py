"""What the speaches stand-in accepts as audio, and how it words a transcript.

Decoding (speaches v0.8.3 dependencies.py audio_file_dependency -> faster_whisper
audio.decode_audio -> PyAV av.open): bytes FFmpeg cannot probe raise
av.error.InvalidDataError, which speaches answers 415 "Failed to decode audio. The
provided file type is not supported." An empty file and a truncated RIFF header are
InvalidDataError too (checked with PyAV 14.2 on decode_audio; speaches 0.8.3 locks 14.4).
The stand-in reads WAV for real and accepts the containers FFmpeg recognises by their
magic bytes (duration estimated as 16 kHz 16-bit mono); anything else is refused.

Formats (routers/stt.py ResponseFormat and segments_to_response; text_utils.py
segments_to_srt / segments_to_vtt): text, json, verbose_json, srt, vtt.
"""

from __future__ import annotations

import io
import json
import wave

NOT_SUPPORTED = "Failed to decode audio. The provided file type is not supported."
RESPONSE_FORMATS = ("text", "json", "verbose_json", "srt", "vtt")


class Undecodable(Exception):
    pass


def _other_container(data: bytes) -> bool:
    """Magic bytes of audio containers FFmpeg probes (FLAC, Ogg, MP3, MP4/M4A, Matroska /
    WebM, AIFF, AMR, CAF)."""
    if data[:4] in (b"fLaC", b"OggS", b"\x1a\x45\xdf\xa3", b"caff") or data[:3] == b"ID3":
        return True
    if data[:5] == b"#!AMR" or data[4:8] == b"ftyp":
        return True
    if data[:4] == b"FORM" and data[8:12] in (b"AIFF", b"AIFC"):
        return True
    return len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0  # MPEG frame sync


def decode(data: bytes) -> tuple[float, str]:
    """(duration in seconds, kind) or Undecodable."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        try:
            with wave.open(io.BytesIO(data)) as wav:
                return wav.getnframes() / wav.getframerate(), "wav"
        except wave.Error as exc:
            if "unknown format" in str(exc):  # float / extensible PCM: FFmpeg reads them
                return len(data) / 32000, "wav"
            raise Undecodable from exc
        except EOFError as exc:
            raise Undecodable from exc
    if _other_container(data):
        return len(data) / 32000, "audio"
    raise Undecodable


def _timestamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def render(text: str, duration: float, language: str, response_format: str) -> tuple[str, str]:
    """(body, content type) of a one-segment transcript."""
    if response_format == "text":
        return text, "text/plain; charset=utf-8"
    if response_format == "srt":
        span = f"{_timestamp(0, ',')} --> {_timestamp(duration, ',')}"
        return f"1\n{span}\n{text}\n\n", "text/plain; charset=utf-8"
    if response_format == "vtt":
        span = f"{_timestamp(0, '.')} --> {_timestamp(duration, '.')}"
        return f"WEBVTT\n\n{span}\n{text}\n\n", "text/vtt; charset=utf-8"
    if response_format == "json":
        return json.dumps({"text": text}), "application/json"
    segment = {
        "id": 0,
        "seek": 0,
        "start": 0.0,
        "end": round(duration, 3),
        "text": text,
        "tokens": [len(text)],
        "temperature": 0.0,
        "avg_logprob": -0.1,
        "compression_ratio": 1.0,
        "no_speech_prob": 0.01,
        "words": None,
    }
    body = {
        "task": "transcribe",
        "language": language,
        "duration": duration,
        "text": text,
        "words": None,
        "segments": [segment],
    }
    return json.dumps(body), "application/json"
