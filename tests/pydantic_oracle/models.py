"""The models of the differential test (tests/pydantic_oracle.rs): used unchanged by the FastAPI
app (app.py) and by the filerouter routes (routes/), which both import them as `_lib.models`.

Plain pydantic 2, nothing filerouter-specific: nested models, `Field` constraints and aliases,
validators, computed fields, `ConfigDict`, generics, discriminated unions, `TypeAdapter`, enums,
dates and times, `Decimal`, `UUID`, `SecretStr`, recursive models, inheritance chains, and
parameter models for the query, headers, cookies and forms.
"""

import datetime
import decimal
import enum
import uuid
from typing import Annotated, Any, Generic, Literal, Optional, TypeVar, Union

from pydantic import (
    AliasChoices,
    AliasPath,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    SecretStr,
    StrictBool,
    TypeAdapter,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Priority(enum.IntEnum):
    low = 1
    normal = 2
    high = 3


class Address(BaseModel):
    """Where something is delivered."""

    street: str = Field(min_length=1, max_length=40)
    city: str
    postcode: str = Field(pattern=r"^[0-9]{5}$", description="Five digits")
    country: str = "US"


class Tag(BaseModel):
    name: str = Field(min_length=1, max_length=12)
    weight: float = Field(default=1.0, ge=0, le=10)


class Item(BaseModel):
    name: str
    price: float = Field(gt=0, description="Price in dollars")
    quantity: int = Field(default=1, ge=0, le=1000)
    tags: list[Tag] = []
    color: Optional[Color] = None
    description: Optional[str] = Field(default=None, max_length=50, examples=["A fine item"])


class Strict(BaseModel):
    """Extra fields are an error, and types convert strictly."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str
    count: int
    active: bool = True


class NoExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    count: int = 0


class KeepsExtras(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class Person(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    full_name: str = Field(alias="fullName", min_length=2)
    age: int = Field(ge=0, le=150)
    nick: Optional[str] = Field(default=None, alias="nickName")


class Contact(BaseModel):
    """Separate names to read and to write."""

    phone: str = Field(validation_alias=AliasChoices("phone", "phoneNumber", AliasPath("numbers", 0)))
    display: str = Field(serialization_alias="displayName")
    note: str = Field(default="", validation_alias="memo", serialization_alias="remark")


class Account(BaseModel):
    username: str
    password: SecretStr
    pin: Optional[SecretStr] = None

    @field_validator("username")
    @classmethod
    def lower(cls, value: str) -> str:
        if " " in value.strip():
            raise ValueError("no spaces in usernames")
        return value.strip().lower()


class Span(BaseModel):
    start: int
    end: int

    @model_validator(mode="after")
    def ordered(self) -> "Span":
        if self.start > self.end:
            raise ValueError(f"start {self.start} is after end {self.end}")
        return self


class Point(BaseModel):
    """Also read from "x,y"."""

    x: float
    y: float

    @model_validator(mode="before")
    @classmethod
    def from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            parts = data.split(",")
            if len(parts) != 2:
                raise ValueError("a point is written x,y")
            return {"x": parts[0], "y": parts[1]}
        return data


class Rectangle(BaseModel):
    width: float = Field(gt=0)
    height: float = Field(gt=0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def area(self) -> float:
        return self.width * self.height


class Price(BaseModel):
    amount: decimal.Decimal = Field(max_digits=8, decimal_places=2)
    currency: str = Field(min_length=3, max_length=3, pattern=r"^[A-Z]+$")

    @field_serializer("amount")
    def as_text(self, value: decimal.Decimal) -> str:
        return f"{value:.2f}"


class Event(BaseModel):
    id: uuid.UUID
    at: datetime.datetime
    day: datetime.date
    starts: Optional[datetime.time] = None
    lasts: datetime.timedelta = datetime.timedelta(hours=1)
    priority: Priority = Priority.normal


class Record(BaseModel):
    """Made from any object with these attributes."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    title: str
    price: Price
    tags: list[str] = []


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: NonNegativeInt
    next_page: Optional[int] = None


class Pair(BaseModel, Generic[K, V]):
    key: K
    value: V


class Cat(BaseModel):
    kind: Literal["cat"]
    name: str
    lives: int = Field(default=9, ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    name: str
    good: bool = True


class Parrot(BaseModel):
    kind: Literal["parrot"]
    name: str
    words: list[str] = []


Pet = Annotated[Union[Cat, Dog, Parrot], Field(discriminator="kind")]


class Owner(BaseModel):
    name: str
    pets: list[Pet] = []
    favourite: Optional[Pet] = None


class Circle(BaseModel):
    shape: Literal["circle"] = "circle"
    radius: float = Field(gt=0)


class Square(BaseModel):
    shape: Literal["square"] = "square"
    side: float = Field(gt=0)


class Drawing(BaseModel):
    title: str
    shapes: list[Annotated[Union[Circle, Square], Field(discriminator="shape")]]


class Node(BaseModel):
    value: int
    children: list["Node"] = []


class Category(BaseModel):
    name: str
    parent: Optional["Category"] = None


class Entity(BaseModel):
    id: PositiveInt
    created: datetime.date = datetime.date(2024, 1, 1)


class Named(Entity):
    name: str = "unnamed"
    labels: list[str] = Field(default_factory=list)


class Product(Named):
    """A subclass that adds a required field after defaulted ones."""

    sku: str = Field(pattern=r"^[A-Z]{3}-[0-9]{3}$")
    price: Price


class ItemPatch(BaseModel):
    name: Optional[str] = None
    price: Optional[float] = Field(default=None, gt=0)
    tags: Optional[list[str]] = None
    color: Color = Color.red


class Profile(BaseModel):
    name: str
    bio: Optional[str] = None
    website: Optional[str] = None
    followers: int = 0
    verified: bool = False
    address: Optional[Address] = None


class Inventory(BaseModel):
    counts: dict[str, NonNegativeInt]
    sizes: tuple[int, int, int]
    codes: set[int] = set()
    flags: frozenset[StrictBool] = frozenset()
    ratio: Annotated[float, Field(ge=0, le=1)] = 0.5


class Order(BaseModel):
    lines: list[Annotated[Item, Field(description="One line")]] = Field(min_length=1, max_length=5)
    address: Address
    gift: bool = False
    coupon: Optional[str] = Field(default=None, pattern=r"^[A-Z0-9]{4,8}$")


class Coupon(BaseModel):
    code: str = Field(min_length=4, max_length=8)
    percent: int = Field(ge=1, le=90)


class Message(BaseModel):
    detail: str


class Stats(BaseModel):
    count: int
    big: int
    ratio: float
    values: list[float] = []


# Parameter models: the query, headers, cookies and a form, read field by field.


class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: Optional[str] = Field(default=None, max_length=10)
    limit: int = Field(default=10, ge=1, le=50)
    offset: NonNegativeInt = 0
    tag: list[str] = []
    order: Literal["asc", "desc"] = "asc"
    color: Optional[Color] = None


class Search(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    term: str = Field(alias="search-term")
    page: PositiveInt = 1
    sort: str = Field(default="name", validation_alias=AliasChoices("sort", "order_by"))


class Client(BaseModel):
    x_token: str
    x_version: int = 1
    x_tags: list[str] = []
    trace: Optional[str] = Field(default=None, alias="X-Trace-Id", description="Where the request came from")


class Session(BaseModel):
    session_id: str = Field(min_length=4)
    theme: Literal["light", "dark"] = "light"
    visits: int = 0


class Login(BaseModel):
    username: str = Field(min_length=3)
    password: str
    remember: bool = False
    scopes: list[str] = []


# TypeAdapters: validating and dumping what is not a model.

PetAdapter: TypeAdapter[Pet] = TypeAdapter(Pet)
PointsAdapter: TypeAdapter[list[Point]] = TypeAdapter(list[Point])


class Row:
    """Not a model: an object with attributes, as an ORM returns (read `from_attributes`)."""

    def __init__(self, id: int, title: str, amount: str, tags: list[str]) -> None:
        self.id = id
        self.title = title
        self.price = {"amount": amount, "currency": "EUR"}
        self.tags = tags
        self.secret = "not in the model"


class Thing:
    """Not a model either: what a handler returns for a model's attributes to be read."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)
