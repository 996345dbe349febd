app_name = "bookshop"
title = "Bookshop"
version = "1.0.0"
description = "examples/bookshop-fastapi ported to filerouter: bodies, declared parameters, forms, uploads, Depends, PyJWT, python-dateutil and a Jinja2 page."
