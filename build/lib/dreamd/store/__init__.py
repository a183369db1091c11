"""The memory file: connection contract, migrations and the SQL dreamd runs."""
