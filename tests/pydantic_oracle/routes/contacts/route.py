from _lib.models import Contact


def POST(contact: Contact) -> Contact:
    return contact
