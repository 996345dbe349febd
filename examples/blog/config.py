app_name = "blog"
title = "Blog"
version = "1.0.0"
description = "Posts and comments in the project's SQLite database: the shape of a FastAPI blog (fastapi_app.py) as a filerouter project."
