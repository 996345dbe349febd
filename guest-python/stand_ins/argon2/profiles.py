"""argon2-cffi's standard parameters, for `PasswordHasher.from_parameters()`.

Unlike argon2-cffi on WebAssembly, the defaults keep `parallelism=4`: the host computes the
lanes, so hashes match those made natively with the defaults.
"""

from ._utils import Parameters
from .low_level import Type

# FIRST RECOMMENDED option per RFC 9106.
RFC_9106_HIGH_MEMORY = Parameters(
    type=Type.ID, version=19, salt_len=16, hash_len=32, time_cost=1, memory_cost=2097152, parallelism=4
)
# SECOND RECOMMENDED option per RFC 9106.
RFC_9106_LOW_MEMORY = Parameters(
    type=Type.ID, version=19, salt_len=16, hash_len=32, time_cost=3, memory_cost=65536, parallelism=4
)
# The pre-RFC defaults in argon2-cffi 18.2.0 - 21.1.0.
PRE_21_2 = Parameters(type=Type.ID, version=19, salt_len=16, hash_len=16, time_cost=2, memory_cost=102400, parallelism=8)
# Only for testing!
CHEAPEST = Parameters(type=Type.ID, version=19, salt_len=8, hash_len=4, time_cost=1, memory_cost=8, parallelism=1)


def get_default_parameters():
    """The default parameters: RFC 9106's low-memory profile."""
    return RFC_9106_LOW_MEMORY
