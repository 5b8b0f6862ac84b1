"""The model side: load a policy wrapper once and serve it to many sim clients over the wire."""
