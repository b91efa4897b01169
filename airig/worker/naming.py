"""A CPU worker's name: its Compose slot (``cpu-1``, ``cpu-2``), not its container id.

`worker-cpu` runs ``deploy.replicas`` containers whose hostnames are container ids, new
at every recreate: named by them, each `up` that recreated the workers left the old
names behind at the brain, silent for ever (``worker_down`` alerts, "2 / 4 alive").
Compose names the containers ``<project>-<service>-<n>`` and reuses ``n`` when it
recreates one, so ``n`` is a stable slot. A container cannot ask the engine its own
name (no socket, by design), but Docker's DNS on a user-defined network answers a
reverse (PTR) query for a container's address with ``<container name>.<network>``
(moby/moby#26298, "PTR query for some other container's IP will still return
container_name.network_name"), so the worker asks it for its own address. The stdlib
has no PTR query that skips /etc/hosts (where the address maps to the container id),
hence the few lines of DNS below.
"""

from __future__ import annotations

import logging
import secrets
import socket
import struct
from pathlib import Path

from airig.common.worker_names import slot_of

log = logging.getLogger("airig.worker")
# Docker's embedded DNS server on a user-defined network (what /etc/resolv.conf names)
DOCKER_DNS = "127.0.0.11"
DNS_PORT = 53
PTR, IN = 12, 1


def slot_name(service: str, timeout_s: float = 1.0) -> str | None:
    """``cpu-2`` for the container ``<project>-worker-cpu-2``; None when DNS does not say
    (not on a Docker network: the caller keeps the hostname)."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        names = reverse_names(address, _nameserver(), timeout_s)
    except (OSError, ValueError, IndexError, struct.error) as exc:
        log.warning("no slot name from DNS; using the hostname", extra={"error": str(exc)})
        return None
    for name in names:
        slot = slot_of(name, service)
        if slot:
            return slot
    log.warning("no slot name from DNS; using the hostname", extra={"names": names})
    return None


def reverse_names(address: str, server: str, timeout_s: float) -> list[str]:
    """The PTR names ``server`` gives for an IPv4 ``address`` (RFC 1035 messages over UDP)."""
    query_id = secrets.randbelow(0x10000)
    qname = ".".join(reversed(address.split("."))) + ".in-addr.arpa"
    query = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + _encode(qname)
    query += struct.pack(">HH", PTR, IN)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.sendto(query, (server, DNS_PORT))
        reply = sock.recv(4096)
    answer_id, flags, questions, answers = struct.unpack(">HHHH", reply[:8])
    if answer_id != query_id or flags & 0x000F:  # not our answer, or an RCODE error
        return []
    offset = 12
    for _ in range(questions):
        offset = _read_name(reply, offset)[1] + 4  # the name, QTYPE, QCLASS
    names = []
    for _ in range(answers):
        offset = _read_name(reply, offset)[1]
        kind, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if kind == PTR:
            names.append(_read_name(reply, offset)[0])
        offset += length
    return names


def _encode(name: str) -> bytes:
    return b"".join(bytes([len(part)]) + part.encode() for part in name.split(".")) + b"\0"


def _read_name(message: bytes, offset: int) -> tuple[str, int]:
    """A (possibly compressed) domain name at ``offset``; the offset after it."""
    labels: list[str] = []
    end = None
    for _ in range(128):  # a pointer loop in a hostile answer ends here
        length = message[offset]
        if length & 0xC0 == 0xC0:  # a pointer to an earlier name (RFC 1035 4.1.4)
            end = end if end is not None else offset + 2
            offset = ((length & 0x3F) << 8) | message[offset + 1]
            continue
        if length == 0:
            return ".".join(labels), end if end is not None else offset + 1
        labels.append(message[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    raise ValueError("DNS name too long")


def _nameserver() -> str:
    try:
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                return parts[1]
    except OSError:
        pass
    return DOCKER_DNS
