"""The SQL endpoint's password file: salted, slow password hashes, one user a line.

Each line is ``name:pbkdf2_sha256$<iterations>$<salt>$<hash>[:role]``: PBKDF2-HMAC-SHA256 (RFC 8018,
section 5.2) of the UTF-8 password with a random 16-byte salt, ``<iterations>`` rounds and a 32-byte
output, salt and hash in standard base64 (with padding); ``role`` is one of :data:`ROLES`
(``analyst`` when absent: reads; ``dbt``: may also write dbt's schema, the endpoint's guard asks
the Java check for it). Blank lines and lines starting with ``#``
are ignored. The same format is read by the endpoint's Java check,
``dev.kappa.serve.PasswordFileAuthenticator`` (``jvm/serve-auth``), with
``SecretKeyFactory("PBKDF2WithHmacSHA256")``, and written only by :func:`add_user`
(``kappa serve user add NAME --file FILE``, password on standard input).

Why these numbers: OWASP's Password Storage Cheat Sheet recommends 600,000 iterations of
PBKDF2-HMAC-SHA256 (:data:`DEFAULT_ITERATIONS`; about 0.4 s in Python and 0.6 s in the JVM on a
build machine, once per login); NIST SP 800-132 asks for a salt of at least 128 bits. A line below
:data:`MIN_ITERATIONS` or above :data:`MAX_ITERATIONS` is refused, so a hand-written line can make a
hash neither cheap to crack nor a login costly to check.

A plain-text ``user:password`` line (the format before salted hashes) is refused, naming the file
and line, rather than accepted with a warning: a file that still holds plain passwords is exactly
what a reader of the Secret or of a backup should not find, and a warning in a server log is easily
missed. Re-add such a user with :func:`add_user`.

Example::

    >>> line = user_line("analyst", "correct horse", iterations=100_000)
    >>> line.startswith("analyst:pbkdf2_sha256$100000$")
    True
    >>> verify_password("correct horse", line.split(":", 1)[1])
    True
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kappa.errors import KappaError

SCHEME = "pbkdf2_sha256"
#: The roles of the endpoint's logins: ``analyst`` (the default) reads; ``dbt`` may also write the
#: ``analytics`` schema (:data:`kappa.services.serve.DBT_SCHEMA`). The Java check has the same list.
ROLES = ("analyst", "dbt")
#: OWASP Password Storage Cheat Sheet (PBKDF2-HMAC-SHA256, 2023 figure).
DEFAULT_ITERATIONS = 600_000
#: Fewer rounds than this and an offline guess is cheap (Django's default in 2017; a quarter of OWASP's).
MIN_ITERATIONS = 100_000
#: More than this and one login costs over ten seconds of a core: a denial of service, not security.
MAX_ITERATIONS = 10_000_000
SALT_BYTES = 16  # NIST SP 800-132, section 5.1: at least 128 bits
HASH_BYTES = 32  # SHA-256's output length: more PBKDF2 output would cost the checker, not an attacker, more
#: User names: no colon (it ends the name), no white space, not starting with ``#`` (a comment).
NAME_RE = re.compile(r"[^:#\s][^:\s]*")
_FORMAT = f"{SCHEME}$<iterations>$<salt base64>$<hash base64>"


class PasswordFileError(KappaError, ValueError):
    """The password file cannot be read or written, or a line of it is not a salted hash; the
    message names the file and, when one is at fault, the line."""


@dataclass(frozen=True)
class PasswordHash:
    """One user's stored hash: PBKDF2-HMAC-SHA256 of the password with ``salt`` over ``iterations``
    rounds is ``digest`` (bytes)."""

    iterations: int
    salt: bytes
    digest: bytes

    def encode(self) -> str:
        """``pbkdf2_sha256$<iterations>$<salt b64>$<hash b64>``: what follows the colon of a line."""
        return f"{SCHEME}${self.iterations}${_b64(self.salt)}${_b64(self.digest)}"

    @classmethod
    def decode(cls, text: str) -> "PasswordHash":
        """The inverse of :meth:`encode`. Raises ValueError saying what is wrong (never echoing
        ``text``, which may be a plain password)."""
        parts = text.split("$")
        if parts[0] != SCHEME:
            raise ValueError("a plain-text password (or an unknown scheme): only salted hashes are accepted")
        if len(parts) != 4:
            raise ValueError(f"not {_FORMAT}")
        if not parts[1].isdigit():
            raise ValueError("the iteration count is not a number")
        iterations = int(parts[1])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"the iteration count is not in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        try:
            salt = base64.b64decode(parts[2], validate=True)
            digest = base64.b64decode(parts[3], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the salt or the hash is not base64") from None
        if len(salt) < SALT_BYTES:
            raise ValueError(f"the salt has {len(salt)} bytes, fewer than {SALT_BYTES}")
        if len(digest) != HASH_BYTES:
            raise ValueError(f"the hash has {len(digest)} bytes, not {HASH_BYTES}")
        return cls(iterations, salt, digest)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _derive(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations, HASH_BYTES)


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> PasswordHash:
    """A fresh hash of ``password`` with a random :data:`SALT_BYTES`-byte salt (``salt`` only for
    tests). Takes about ``iterations / 1.5e6`` s (one core of the build machine). Raises ValueError for an empty password or
    an iteration count outside [:data:`MIN_ITERATIONS`, :data:`MAX_ITERATIONS`]."""
    if not password:
        raise ValueError("the password is empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"the iteration count {iterations} is not in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return PasswordHash(iterations, salt, _derive(password, salt, iterations))


def verify_password(password: str, encoded: str | PasswordHash) -> bool:
    """Whether ``password`` is the one ``encoded`` (a line's part after the colon) was made from;
    the comparison takes the same time wherever the first differing byte is. Raises ValueError
    when ``encoded`` is not a salted hash."""
    stored = encoded if isinstance(encoded, PasswordHash) else PasswordHash.decode(encoded)
    return hmac.compare_digest(_derive(password, stored.salt, stored.iterations), stored.digest)


def check_name(name: str) -> str:
    """``name`` if it can be a user of the file; raises ValueError saying why not."""
    if not NAME_RE.fullmatch(name or ""):
        raise ValueError(f"{name!r} cannot be a user name: it must be non-empty, without ':' or white "
                         "space, and not start with '#'")
    return name


def check_role(role: str) -> str:
    """``role`` if it is one of :data:`ROLES`; raises ValueError naming them otherwise."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return role


def user_line(name: str, password: str, iterations: int = DEFAULT_ITERATIONS, role: str = ROLES[0]) -> str:
    """``name:pbkdf2_sha256$…[:role]`` for a password file (without the newline; no role for
    the default one)."""
    suffix = "" if check_role(role) == ROLES[0] else f":{role}"
    return f"{check_name(name)}:{hash_password(password, iterations).encode()}{suffix}"


def _parse(path: Path, lines: list[str]) -> dict[str, tuple[int, PasswordHash, str]]:
    users: dict[str, tuple[int, PasswordHash, str]] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        if not sep or not name or not encoded:
            raise PasswordFileError(f"{path}: line {n} is not `user:{_FORMAT}`")
        if name in users:
            raise PasswordFileError(f"{path}: line {n}: user {name!r} is already on line {users[name][0]}")
        encoded, _, role = encoded.partition(":")
        try:
            users[name] = (n, PasswordHash.decode(encoded), check_role(role or ROLES[0]))
        except ValueError as err:
            hint = f"; set it with `kappa serve user add {name} --file {path}`" if "plain-text" in str(err) else ""
            raise PasswordFileError(f"{path}: line {n} (user {name!r}): {err}{hint}") from None
    return users


def read_password_file(path: Path | str) -> dict[str, PasswordHash]:
    """User -> stored hash of every line of the file at ``path``, in file order. Raises
    :class:`PasswordFileError` naming the file (and line) when it is missing or unreadable, holds
    no user, a line is not ``user:pbkdf2_sha256$…`` (a plain-text password included), or a user
    appears twice. The checks :data:`AUTH_CLASS <kappa.services.serve.AUTH_CLASS>` makes too."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise PasswordFileError(f"{path}: cannot read the password file ({reason})") from err
    users = {name: h for name, (_, h, _role) in _parse(path, lines).items()}
    if not users:
        raise PasswordFileError(f"{path}: no `user:{_FORMAT}` line")
    return users


def read_roles(path: Path | str) -> dict[str, str]:
    """User -> role (:data:`ROLES`) of every line of the password file at ``path``; raises as
    :func:`read_password_file`."""
    read_password_file(path)
    return {name: role for name, (_, _h, role) in _parse(Path(path), Path(path).read_text(encoding="utf-8").splitlines()).items()}


def add_user(path: Path | str, name: str, password: str, iterations: int = DEFAULT_ITERATIONS,
             role: str = ROLES[0]) -> bool:
    """Write ``name``'s salted hash of ``password``, with ``role`` (:data:`ROLES`), to the password
    file at ``path``: its line is
    replaced where it is, or appended; every other line (comments too) is kept as it is. Returns
    True when ``name`` was already there.

    The file is replaced atomically (a temporary file in the same folder, then ``os.replace``), so
    the endpoint, which re-reads the file when it changes, never reads half of it. A new file is
    created with mode 0600; an existing file keeps its mode. Raises ValueError for a bad name,
    role, empty password or iteration count, :class:`PasswordFileError` when the file cannot be read or
    written."""
    path = Path(path)
    line = user_line(name, password, iterations, role)
    try:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    except (OSError, UnicodeDecodeError) as err:
        raise PasswordFileError(f"{path}: cannot read the password file ({err})") from err
    kept: list[str] = []
    replaced = False
    for existing in lines:
        if existing.lstrip().startswith("#") or existing.partition(":")[0] != name:
            kept.append(existing)
        elif not replaced:  # a second line of the same user (written by hand) goes
            kept.append(line)
            replaced = True
    if not replaced:
        kept.append(line)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600 from the start
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write("\n".join(kept) + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise PasswordFileError(f"{path}: cannot write the password file ({err.strerror or err})") from err
    return replaced
