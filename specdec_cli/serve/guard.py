"""Who may call the server: API keys (each key a tenant), the Host check, the Origin check, CORS.

A web page the user visits can send requests to 127.0.0.1 as well as any program can. Three
rules keep it out, in the order `Access.check` applies them to every request:

1. **Host.** When the server listens on a loopback address, the Host header must name it:
   127.0.0.1, localhost, [::1] or the address it listens on (127.0.0.2, say), plus each
   `--allowed-host NAME`, with the server's port or none. A page that rebinds its own hostname to 127.0.0.1 (DNS rebinding) sends its own
   name, and gets 400. On another address the check applies only to names given with
   `--allowed-host`.
2. **Origin.** A browser names the page that sends a request in `Origin`. The server's own
   page (Origin http://HOST, HOST the Host header) and each `--cors-origin ORIGIN` pass; any
   other gets 403. A request without Origin (curl, the openai client) passes.
3. **Keys.** With keys, /v1 and /slots need `Authorization: Bearer KEY`; the key's number is
   the request's tenant. Without keys there is one tenant, "".
4. **The admin key** (`--admin-key-file`, SPECDEC_ADMIN_KEY) is the operator's, no tenant: what
   sums up every tenant's traffic (/metrics; /slots' other slots, passes and drafting rates)
   needs it (`check_admin`, `sees_everything`) once there are keys of either kind. A tenant's
   key gets 403 there, no key 401. A server with no keys at all stays open (loopback).

    access = Access.for_bind("127.0.0.1", 8080, keys=("k1", "k2"), admin_keys=("a1",))
    access.check_host("localhost:8080")            # passes
    access.check_host("evil.example:8080")         # Refused(400, "the Host header names ...")
    access.check_origin("http://evil.example", "localhost:8080")  # Refused(403, ...)
    access.tenant("Bearer k2")                     # -> "key-2"
    access.check_admin("Bearer k2", "/metrics")    # Refused(403, "a tenant's key does not open /metrics ...")
    access.sees_everything("Bearer a1")            # -> True

A POST body's Content-Type (application/json, else 415) is body.py's `read_json`.

Left out: the HTTP plumbing (middleware.py turns these into responses and CORS headers),
what a tenant owns (worker.py: its drafting memory, its cached prefix).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
CORS_METHODS = "GET, POST, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type"
CORS_MAX_AGE = 600  # seconds a browser may keep a preflight's answer


class Refused(Exception):
    """A request this server does not take from this caller: its status, message and code."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is this machine only. Example: "::1" -> True, "0.0.0.0" -> False."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_key_file(path: Path) -> list[str]:
    """The keys in FILE: one per line, blank lines and comments ignored: a `#` that starts a line or
    follows whitespace starts one, so a key may hold `#`. OSError or ValueError (no key in it) for
    the caller to show in one line. Example: "# ours\\nk1\\n\\n k2 # Bo's\\nXy#9f\\n" -> ["k1", "k2", "Xy#9f"]."""
    keys = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        if line:
            keys.append(line)
    if not keys:
        raise ValueError("it holds no key (one per line; # starts a comment)")
    return keys


def split_host(value: str) -> tuple[str, int | None]:
    """A Host header's name and port. Examples: "localhost:8080" -> ("localhost", 8080),
    "[::1]:80" -> ("[::1]", 80), "example" -> ("example", None), "a:b" -> ("a:b", None)."""
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and (not name.startswith("[") or name.endswith("]")) and "]" not in port:
        return name.lower(), int(port)
    return value.lower(), None


@dataclass(frozen=True)
class Access:
    """The server's access rules, fixed at start (cli/serve.py builds them from its options)."""

    keys: tuple[str, ...] = ()
    hosts: frozenset[str] | None = None  # the names Host may give; None: any
    port: int | None = None  # the port Host may give besides none
    cors_origins: frozenset[str] = field(default_factory=frozenset)
    admin_keys: tuple[str, ...] = ()  # none of them a tenant's key (cli/serve.py checks)

    @classmethod
    def for_bind(cls, host: str, port: int, keys=(), allowed_hosts=(), cors_origins=(), admin_keys=()) -> "Access":
        """The rules for a server listening on host:port (port as bound, not 0)."""
        names = None
        if is_loopback(host) or allowed_hosts:
            own = [f"[{host.strip('[]').lower()}]" if ":" in host else host.lower()] if is_loopback(host) else []
            names = frozenset([*LOOPBACK_NAMES, *own, *(h.lower() for h in allowed_hosts)])
        return cls(tuple(keys), names, port, frozenset(o.rstrip("/") for o in cors_origins), tuple(admin_keys))

    def check_host(self, host: str | None) -> None:
        if self.hosts is None:
            return
        name, port = split_host(host or "")
        if name not in self.hosts or (port is not None and port != self.port):
            allowed = ", ".join(sorted(self.hosts))
            raise Refused(
                400, f"the Host header names {host or 'nothing'!r}, not this server ({allowed}, port {self.port}); "
                "to reach it by another name, start it with --allowed-host NAME", "host_not_allowed"
            )  # fmt: skip

    def check_origin(self, origin: str | None, host: str | None) -> bool:
        """Whether the request comes from another origin that --cors-origin allows (it then gets CORS
        headers); False for no Origin or the server's own page; Refused(403) for any other."""
        if origin is None:
            return False
        origin = origin.rstrip("/")
        if origin in self.cors_origins or "*" in self.cors_origins:
            return True
        if host and origin.lower() in (f"http://{host.lower()}", f"https://{host.lower()}"):
            return False
        raise Refused(
            403, f"requests from the page at {origin} are refused; start the server with --cors-origin {origin} to allow it",
            "origin_not_allowed",
        )  # fmt: skip

    def tenant(self, authorization: str | None) -> str:
        """The caller's tenant: "" without keys, else "key-N" for the Nth key; Refused(401) otherwise."""
        if not self.keys:
            return ""
        found = _matching(authorization, self.keys)
        if not found:
            raise Refused(401, "invalid or missing API key: send Authorization: Bearer KEY", "invalid_api_key")
        return f"key-{found}"

    def sees_everything(self, authorization: str | None) -> bool:
        """Whether the caller may see every tenant's figures: it sends an admin key, or the server
        has no keys of either kind (one tenant: everything is its own)."""
        if not self.keys and not self.admin_keys:
            return True
        return _matching(authorization, self.admin_keys) > 0

    def check_admin(self, authorization: str | None, what: str) -> None:
        """Passes when the caller sees everything; for `what` (an endpoint) a tenant's key gets
        Refused(403), since it sums up the other tenants' traffic too, and no key Refused(401)."""
        if self.sees_everything(authorization):
            return
        none = "" if self.admin_keys else " (start the server with --admin-key-file FILE, or SPECDEC_ADMIN_KEY, to have one)"
        if self.keys and _matching(authorization, self.keys):
            raise Refused(403, f"a tenant's key does not open {what}, which counts every tenant's requests: send the admin key{none}", "admin_key_required")
        raise Refused(401, f"invalid or missing admin key: {what} needs Authorization: Bearer ADMIN_KEY{none}", "invalid_api_key")

    def cors_headers(self, origin: str) -> dict[str, str]:
        """The headers that let an allowed page read a response."""
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}

    def preflight_headers(self, origin: str, requested: str | None = None) -> dict[str, str]:
        """A preflight's answer for an allowed page: the methods it may use, and the headers it asks
        to send (the openai JS SDK adds its own x-stainless-* headers), at least CORS_HEADERS. The
        page is one --cors-origin allows; what it may read is still behind the key."""
        asked = [h.strip() for h in (requested or "").split(",") if re.fullmatch(r"[A-Za-z0-9-]{1,100}", h.strip())]
        allowed: dict[str, str] = {}
        for name in [*CORS_HEADERS.split(", "), *asked[:64]]:  # each header once, whatever its case
            allowed.setdefault(name.lower(), name)
        return {
            **self.cors_headers(origin),
            "Access-Control-Allow-Methods": CORS_METHODS,
            "Access-Control-Allow-Headers": ", ".join(allowed.values()),
            "Access-Control-Max-Age": str(CORS_MAX_AGE),
        }


def _matching(authorization: str | None, keys: tuple[str, ...]) -> int:
    """Which of `keys` a header `Bearer KEY` sends: its number from 1, or 0 for none. Every key is
    compared, each in constant time. Example: ("Bearer k2", ("k1", "k2")) -> 2."""
    given = authorization or ""
    token = (given[7:] if given[:7].lower() == "bearer " else "").encode("utf-8", "replace")
    found = 0
    for i, key in enumerate(keys, 1):
        if hmac.compare_digest(token, key.encode("utf-8")):
            found = i
    return found
