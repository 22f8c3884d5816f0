"""`specdec serve`, a front-end: OpenAI's API and a live page over one loaded pair.

types.py reads requests (pydantic) into Settings by options.py's checks, worker.py owns the
pair and serves `--slots` generations at once (their rows batched) from a FIFO, wire.py turns events into OpenAI's JSON,
app.py is the HTTP side (FastAPI), static/ the page. It uses the core only; cli/serve.py gives
it a command.
"""
