"""Loopback addresses for pods: each pod gets its own 127.0.x.y.

Called by ``testbed.kubelet.worker`` when a pod starts and when it is removed.
Addresses are handed out round-robin so a freed address is not reused at once
(sockets of the previous owner may linger in TIME_WAIT).
"""

from __future__ import annotations

import ipaddress
import threading

_FIRST = int(ipaddress.IPv4Address("127.0.0.10"))
_LAST = int(ipaddress.IPv4Address("127.0.255.254"))


class AddressPool:
    def __init__(self, first: int = _FIRST, last: int = _LAST) -> None:
        self._first = first
        self._last = last
        self._next = first
        self._owners: dict[int, str] = {}
        self._lock = threading.Lock()

    def allocate(self, owner: str) -> str:
        with self._lock:
            for ip, who in self._owners.items():
                if who == owner:
                    return str(ipaddress.IPv4Address(ip))
            size = self._last - self._first + 1
            for _ in range(size):
                candidate = self._next
                self._next = self._first if self._next >= self._last else self._next + 1
                last_octet = candidate & 0xFF
                if last_octet in (0, 255) or candidate in self._owners:
                    continue
                self._owners[candidate] = owner
                return str(ipaddress.IPv4Address(candidate))
        raise RuntimeError("the pod address pool 127.0.0.10-127.0.255.254 is exhausted")

    def release(self, owner: str) -> None:
        with self._lock:
            for ip in [ip for ip, who in self._owners.items() if who == owner]:
                del self._owners[ip]
