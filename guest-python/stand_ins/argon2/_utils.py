"""argon2-cffi's `Parameters` and `extract_parameters`."""

from dataclasses import dataclass

from .exceptions import InvalidHashError
from .low_level import Type


def _check_types(**kw):
    """Each `name=(value, types)` checked; a readable text of the violations, or None."""
    errors = []
    for name, (value, types) in kw.items():
        if not isinstance(value, types):
            if isinstance(types, tuple):
                types = ", or ".join(t.__name__ for t in types)
            else:
                types = types.__name__
            errors.append(f"'{name}' must be a {types} (got {type(value).__name__})")
    return ", ".join(errors) + "." if errors else None


def _decoded_str_len(length):
    """How many bytes `length` characters of unpadded base64 hold."""
    return length // 4 * 3 + {3: 2, 2: 1}.get(length % 4, 0)


@dataclass
class Parameters:
    """Argon2 hash parameters (memory_cost in KiB)."""

    type: Type
    version: int
    salt_len: int
    hash_len: int
    time_cost: int
    memory_cost: int
    parallelism: int

    __slots__ = ("hash_len", "memory_cost", "parallelism", "salt_len", "time_cost", "type", "version")


_NAME_TO_TYPE = {"argon2id": Type.ID, "argon2i": Type.I, "argon2d": Type.D}
_REQUIRED_KEYS = sorted(("v", "m", "t", "p"))


def extract_parameters(hash):
    """The parameters an encoded `hash` was made with."""
    parts = hash.split("$")
    # Argon2 1.2 hashes have no version field.
    if len(parts) == 5:
        parts.insert(2, "v=18")
    if len(parts) != 6 or parts[0]:
        raise InvalidHashError
    try:
        type = _NAME_TO_TYPE[parts[1]]
        kvs = {k: int(v) for k, v in (s.split("=") for s in [parts[2], *parts[3].split(",")])}
    except Exception:  # noqa: BLE001
        raise InvalidHashError from None
    if sorted(kvs.keys()) != _REQUIRED_KEYS:
        raise InvalidHashError
    return Parameters(
        type=type,
        salt_len=_decoded_str_len(len(parts[4])),
        hash_len=_decoded_str_len(len(parts[5])),
        version=kvs["v"],
        time_cost=kvs["t"],
        memory_cost=kvs["m"],
        parallelism=kvs["p"],
    )


def validate_params_for_platform(params):
    """Nothing to refuse: the host computes every lane, whatever the guest's platform."""
