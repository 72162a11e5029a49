"""Users, password hashes and per-vhost permissions, as RabbitMQ keeps them.

Password hashes use RabbitMQ's default scheme (rabbit_password_hashing_sha256):
base64(salt[4] + sha256(salt + password)), so definitions can move between the two.
Permissions are three regexes per (user, vhost): configure, write, read. As in
RabbitMQ (rabbit_auth_backend_internal), a pattern is searched for anywhere in the
name, not anchored: `alice` grants `xalicex`, `^alice-` only names starting so. An
empty pattern stands for `^$`, which no exchange or queue name matches (the default
exchange is checked as `amq.default`): it grants nothing.
See https://www.rabbitmq.com/access-control.html#authorisation
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = secrets.token_bytes(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def check_password(password: str, password_hash: str) -> bool:
    try:
        raw = base64.b64decode(password_hash)
    except ValueError:
        return False
    salt = raw[:4]
    return hmac.compare_digest(hash_password(password, salt).encode(), password_hash.encode())


@dataclass(frozen=True)
class Permission:
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    # Answers so far: every publish checks write access to its exchange, and a regex
    # match per publish showed in profiles. Frozen, so answers never go stale.
    _answers: dict[tuple[str, str], bool] = field(default_factory=dict, compare=False, repr=False)

    def allows(self, kind: str, name: str) -> bool:
        answer = self._answers.get((kind, name))
        if answer is None:
            if len(self._answers) >= _MAX_ANSWERS:
                self._answers.clear()
            pattern: str = getattr(self, kind)
            answer = _compiled(pattern or "^$").search(name) is not None
            self._answers[(kind, name)] = answer
        return answer


_MAX_ANSWERS = 10_000


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


@dataclass
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    permissions: dict[str, Permission] = field(default_factory=dict)  # vhost -> permission


class UserStore:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}

    def add_user(self, name: str, password: str, tags: tuple[str, ...] = ()) -> User:
        user = User(name, hash_password(password), tags)
        self.users[name] = user
        return user

    def authenticate(self, name: str, password: str) -> User | None:
        user = self.users.get(name)
        if user is None or not check_password(password, user.password_hash):
            return None
        return user

    def set_permissions(self, name: str, vhost: str, permission: Permission) -> None:
        self.users[name].permissions[vhost] = permission

    def put_user(self, name: str, password_hash: str, tags: tuple[str, ...]) -> bool:
        """Create a user, or change an existing one in place (its open connections hold
        the same object, so they see the change); True if it was created."""
        user = self.users.get(name)
        if user is None:
            self.users[name] = User(name, password_hash, tags)
            return True
        user.password_hash, user.tags = password_hash, tags
        return False

    def delete_user(self, name: str) -> bool:
        return self.users.pop(name, None) is not None

    def clear_permissions(self, name: str, vhost: str) -> bool:
        user = self.users.get(name)
        return user is not None and user.permissions.pop(vhost, None) is not None
