"""What tests/ and bench/ both use, and neither owns: a server that speaks the OpenAI API
(and fails when told), a throwaway PostgreSQL server, the friend list. bench/ never
imports tests/; both import this."""
