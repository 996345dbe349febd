from typing import Any

from _lib.models import Account


def POST(account: Account) -> dict[str, Any]:
    return {"username": account.username, "length": len(account.password.get_secret_value())}
