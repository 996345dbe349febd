from _lib.models import Person


def POST(person: Person) -> Person:
    return person
