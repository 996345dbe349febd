"""The FastAPI side of the differential test (tests/pydantic_oracle.rs): every operation of the
filerouter routes in routes/, the same handler code, on the same models (`_lib/models.py`).
"""

from typing import Annotated, Any, Optional

from fastapi import Body, Cookie, FastAPI, Form, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from _lib.models import (
    Account,
    Address,
    Category,
    Client,
    Contact,
    Coupon,
    Drawing,
    Entity,
    Event,
    Filters,
    Inventory,
    Item,
    ItemPatch,
    KeepsExtras,
    Login,
    Message,
    Named,
    Node,
    NoExtras,
    Order,
    Owner,
    Page,
    Pair,
    Person,
    Pet,
    PetAdapter,
    Point,
    PointsAdapter,
    Price,
    Product,
    Profile,
    Record,
    Rectangle,
    Row,
    Search,
    Session,
    Span,
    Stats,
    Strict,
    Tag,
    Thing,
)

app = FastAPI()


@app.get("/")
def index() -> dict[str, str]:
    return {"app": "pydantic oracle"}


# Single bodies, answered through the return annotation.


@app.post("/items")
def create_item(item: Item) -> Item:
    return item


@app.post("/items/many")
def create_items(items: list[Item]) -> list[Item]:
    return items


@app.post("/items/by-name")
def items_by_name(items: dict[str, Item]) -> dict[str, Item]:
    return items


@app.patch("/items/{item_id}", response_model=ItemPatch, response_model_exclude_unset=True)
def patch_item(item_id: int, patch: ItemPatch) -> Any:
    return patch


@app.post("/strict")
def strict(body: Strict) -> dict[str, Any]:
    return {"got": body.model_dump()}


@app.post("/no-extras")
def no_extras(body: NoExtras) -> NoExtras:
    return body


@app.post("/extras")
def extras(body: KeepsExtras) -> Any:
    return body


@app.post("/people")
def people(person: Person) -> Person:
    return person


@app.post("/people/by-name", response_model=Person, response_model_by_alias=False)
def people_by_name(person: Person) -> Any:
    return person


@app.post("/contacts")
def contacts(contact: Contact) -> Contact:
    return contact


@app.post("/accounts")
def accounts(account: Account) -> Account:
    return account


@app.post("/accounts/reveal")
def reveal(account: Account) -> dict[str, Any]:
    return {"username": account.username, "length": len(account.password.get_secret_value())}


@app.post("/spans")
def spans(span: Span) -> Span:
    return span


@app.post("/points")
def points(points: list[Point]) -> list[Point]:
    return points


@app.post("/points/adapter")
async def points_adapter(request: Request) -> Any:
    try:
        found = PointsAdapter.validate_python(await request.json())
    except ValidationError as e:
        return JSONResponse({"errors": e.errors(include_url=False, include_context=False)}, status_code=400)
    return PointsAdapter.dump_python(found, mode="json")


@app.post("/rectangles")
def rectangles(rectangle: Rectangle) -> Rectangle:
    return rectangle


@app.post("/prices")
def prices(price: Price) -> Price:
    return price


@app.post("/events")
def events(event: Event) -> Event:
    return event


@app.post("/stats")
def stats(stats: Stats) -> Stats:
    return stats


@app.post("/stats/plain")
def stats_plain(stats: Stats) -> dict[str, Any]:
    return {"count": stats.count, "big": stats.big}


@app.get("/records/{record_id}", response_model=Record)
def record(record_id: int) -> Any:
    return Row(record_id, f"record {record_id}", "12.5", ["a", "b"])


@app.get("/records/{record_id}/broken", response_model=Record)
def broken_record(record_id: int) -> Any:
    return Thing(id=record_id, title="no price")


@app.get("/things", response_model=Named)
def things() -> Any:
    return Thing(id=7, name="seven", labels=["x"], created="2020-02-02", secret="hidden")


@app.get("/things/product", response_model=Entity)
def product_as_entity() -> Any:
    return Product(id=3, sku="ABC-123", price=Price(amount="1.5", currency="EUR"))


@app.get("/pages")
def pages(size: int = 2) -> Page[Item]:
    items = [{"name": f"item {n}", "price": n + 0.5} for n in range(size)]
    return Page[Item](items=items, total=size, next_page=None if size < 3 else 2)


@app.post("/pages")
def post_page(page: Page[Tag]) -> Page[Tag]:
    return page


@app.post("/pairs")
def pairs(pair: Pair[str, int]) -> Pair[str, int]:
    return pair


@app.post("/pets")
def pets(pet: Pet) -> Pet:
    return pet


@app.post("/pets/adapter")
async def pets_adapter(request: Request) -> Any:
    try:
        pet = PetAdapter.validate_json((await request.body()).decode())
    except ValidationError as e:
        return JSONResponse({"errors": e.errors(include_url=False, include_context=False)}, status_code=400)
    return {"kind": pet.kind, "dumped": PetAdapter.dump_python(pet, mode="json"), "schema": PetAdapter.json_schema()}


@app.post("/owners")
def owners(owner: Owner) -> Owner:
    return owner


@app.post("/drawings")
def drawings(drawing: Drawing) -> Drawing:
    return drawing


@app.post("/trees")
def trees(node: Node) -> Node:
    return node


@app.post("/trees/sum")
def tree_sum(node: Node) -> dict[str, int]:
    def total(n: Node) -> int:
        return n.value + sum(total(c) for c in n.children)

    return {"sum": total(node)}


@app.post("/categories")
def categories(category: Category) -> Category:
    return category


@app.post("/products")
def products(product: Product) -> Product:
    return product


@app.post("/inventory")
def inventory(inventory: Inventory) -> Inventory:
    return inventory


# response_model_* options.


@app.post("/profiles", response_model=Profile, response_model_exclude_none=True)
def profiles(profile: Profile) -> Any:
    return profile


@app.post("/profiles/defaults", response_model=Profile, response_model_exclude_defaults=True)
def profiles_defaults(profile: Profile) -> Any:
    return profile


@app.post("/profiles/unset", response_model=Profile, response_model_exclude_unset=True)
def profiles_unset(profile: Profile) -> Any:
    return profile


@app.post("/profiles/include", response_model=Profile, response_model_include={"name", "address"})
def profiles_include(profile: Profile) -> Any:
    return profile


@app.post("/profiles/exclude", response_model=Profile, response_model_exclude={"website", "address"})
def profiles_exclude(profile: Profile) -> Any:
    return profile


@app.post("/profiles/from-dict", response_model=Profile, response_model_exclude_unset=True)
def profiles_from_dict(profile: Profile) -> Any:
    return {"name": profile.name.upper(), "followers": profile.followers + 1, "extra": "dropped"}


# Several bodies, embedded bodies.


@app.post("/orders")
def orders(order: Order, coupon: Optional[Coupon] = None) -> dict[str, Any]:
    total = sum(line.price * line.quantity for line in order.lines)
    if coupon is not None:
        total = total * (100 - coupon.percent) / 100
    return {"lines": len(order.lines), "total": round(total, 2), "city": order.address.city, "coupon": coupon}


@app.post("/orders/embedded")
def orders_embedded(order: Annotated[Order, Body(embed=True)]) -> Order:
    return order


@app.post("/transfers")
def transfers(
    source: Address,
    target: Address,
    note: Annotated[str, Body(max_length=20)] = "",
    priority: Annotated[int, Body(ge=1, le=3)] = 2,
) -> dict[str, Any]:
    return {"from": source.city, "to": target.city, "note": note, "priority": priority}


# Parameter models: the query, headers, cookies, a form.


@app.get("/search")
def search(filters: Annotated[Filters, Query()]) -> Filters:
    return filters


@app.get("/search/terms")
def search_terms(search: Annotated[Search, Query()]) -> dict[str, Any]:
    return search.model_dump()


@app.get("/client")
def client(headers: Annotated[Client, Header()]) -> Client:
    return headers


@app.get("/session")
def session(cookies: Annotated[Session, Cookie()]) -> Session:
    return cookies


@app.post("/login")
def login(form: Annotated[Login, Form()]) -> dict[str, Any]:
    return {"username": form.username, "remember": form.remember, "scopes": form.scopes}


@app.get("/messages/{code}", response_model=Message)
def message(code: int) -> Any:
    return {"detail": f"code {code}", "internal": True}
