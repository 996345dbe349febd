def GET() -> dict[str, str]:
    return {"app": "pydantic oracle"}
