"""The shared engine: a PostgreSQL server that several dreamd workers share under leases
(`dreamd.store.leases`). `store` (PgStore, its connection and the one module that imports
psycopg), `dialect` (the statements PostgreSQL spells its own way), `schema` (the tables,
written out whole, and their upgrades). Only `dreamd.store` imports these."""
