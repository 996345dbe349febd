app_name = "sqlalchemy-blog"
title = "Blog on SQLAlchemy"
description = "Posts and comments through SQLAlchemy 2's ORM on the project's database: what bench/dev_snapshot.sh measures."
