from _lib.models import Node


def POST(node: Node) -> Node:
    return node
