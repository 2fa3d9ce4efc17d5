"""Loopback addresses for pods: each pod gets its own 127.0.x.y.

Called by ``testbed.kubelet.worker`` when a pod starts and when it is removed.
Addresses are handed out round-robin from a random starting /24, so a freed
address is not reused at once (sockets of its previous owner may linger in
TIME_WAIT), and an address some other process listens on (another test bed's
pod, say) is skipped.
"""

from __future__ import annotations

import ipaddress
import random
import threading

_FIRST = int(ipaddress.IPv4Address("127.0.0.10"))
_LAST = int(ipaddress.IPv4Address("127.0.255.254"))


def listening_ipv4() -> set[int]:
    """IPv4 addresses with a listening TCP socket on this machine (from /proc/net/tcp)."""
    found: set[int] = set()
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                    local_hex = fields[1].split(":")[0]
                    found.add(int.from_bytes(bytes.fromhex(local_hex), "little"))
    except OSError:
        pass
    return found


class AddressPool:
    def __init__(self, first: int = _FIRST, last: int = _LAST, start: int | None = None) -> None:
        self._first = first
        self._last = last
        if start is None:
            start = min(last, first + 256 * random.randrange(0, 200))
        self._next = start
        self._owners: dict[int, str] = {}
        self._lock = threading.Lock()

    def allocate(self, owner: str) -> str:
        with self._lock:
            for ip, who in self._owners.items():
                if who == owner:
                    return str(ipaddress.IPv4Address(ip))
            busy = listening_ipv4()
            for _ in range(self._last - self._first + 1):
                candidate = self._next
                self._next = self._first if self._next >= self._last else self._next + 1
                if (candidate & 0xFF) in (0, 1, 255) or candidate in self._owners or candidate in busy:
                    continue
                self._owners[candidate] = owner
                return str(ipaddress.IPv4Address(candidate))
        raise RuntimeError("the pod address pool 127.0.0.10-127.0.255.254 is exhausted")

    def release(self, owner: str) -> None:
        with self._lock:
            for ip in [ip for ip, who in self._owners.items() if who == owner]:
                del self._owners[ip]
