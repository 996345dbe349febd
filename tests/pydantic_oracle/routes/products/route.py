from _lib.models import Product


def POST(product: Product) -> Product:
    return product
