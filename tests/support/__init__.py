"""Support code for the tests: test doubles that speak the real wire protocols (a scripted LLM provider)."""
