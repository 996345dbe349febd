-- Posts and their comments. Applied once by `filerouter dev`, `filerouter db migrate` or
-- `filerouter run --migrate` (and by fastapi_app.py at start).
CREATE TABLE posts (
    id         INTEGER PRIMARY KEY,
    title      TEXT NOT NULL UNIQUE,
    body       TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE comments (
    id         INTEGER PRIMARY KEY,
    post_id    INTEGER NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE INDEX comments_by_post ON comments (post_id, id);
