from _lib.models import Pet


def POST(pet: Pet) -> Pet:
    return pet
