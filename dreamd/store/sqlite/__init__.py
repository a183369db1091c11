"""The embedded engine: a SQLite file in WAL mode that dreamd shares with the chat app as
a guest. `store` (SqliteStore and the connection contract), `driver` (the two SQLite
libraries, and the one module that imports them), `dialect` (the statements SQLite spells
its own way), `schema` (the versioned migrations), `app_file` (a file as an app makes one).
Only `dreamd.store` imports these."""
