from _lib.models import Account


def POST(account: Account) -> Account:
    return account
