"""`dreamd serve` and `dreamd mcp`: memory over HTTP (a JSON API, Prometheus metrics, a
page to look inside) and over MCP, on the same config, store and Memory as the library."""
