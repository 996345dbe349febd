from _lib.models import Node


def POST(node: Node) -> dict[str, int]:
    def total(n: Node) -> int:
        return n.value + sum(total(c) for c in n.children)

    return {"sum": total(node)}
