"""CURVE keys from the folder `bbcluster keygen` makes. Each file holds Z85 keys of 40
characters, one per line, as cluster/curve_keys.cpp writes and reads them:

    # bbcluster CURVE key (Z85)
    public-key: <40 characters>
    secret-key: <40 characters>       (only in the .key files)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import zmq

from .errors import BBClusterError


@dataclass(frozen=True)
class KeyPair:
    public_key: str
    secret_key: str = ""


def read_key_file(path: str) -> KeyPair:
    """The keys in one file, read by the server's rules: blank lines and lines starting with
    "#" are ignored; every other line is "public-key: KEY" or "secret-key: KEY"."""
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BBClusterError(f"{path}: cannot read the key file: {e}") from None
    keys = {}
    for number, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition(":")
        value = value.lstrip(" ")
        if len(value) != 40 or name not in ("public-key", "secret-key"):
            raise BBClusterError(f"{path}:{number}: expected 'public-key: KEY' or "
                                 f"'secret-key: KEY' with a 40-character Z85 key")
        keys[name] = value
    if "public-key" not in keys:
        raise BBClusterError(f"{path}: no public-key line")
    return KeyPair(keys["public-key"], keys.get("secret-key", ""))


def configure_curve_client(socket: zmq.Socket, keys_dir: str) -> None:
    """Makes `socket` a CURVE client that presents the coordinator's key pair and expects the
    server's key: the server admits whoever may run a sweep on the cluster (docs/serving.md)."""
    if not zmq.has("curve"):
        raise BBClusterError("this pyzmq's libzmq has no CURVE support (built without "
                             "libsodium); it cannot connect with keys")
    coordinator_path = os.path.join(keys_dir, "coordinator.key")
    coordinator = read_key_file(coordinator_path)
    if not coordinator.secret_key:
        raise BBClusterError(f"{coordinator_path}: no secret-key line")
    server = read_key_file(os.path.join(keys_dir, "node.pub"))
    socket.curve_publickey = coordinator.public_key.encode("ascii")
    socket.curve_secretkey = coordinator.secret_key.encode("ascii")
    socket.curve_serverkey = server.public_key.encode("ascii")
