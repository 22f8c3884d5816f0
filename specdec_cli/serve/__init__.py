"""`specdec serve`, a front-end: OpenAI's API and a live page over one loaded pair.

- app.py: the FastAPI app, each route wired to the part that answers it;
- body.py: a request's body read within limits into a JSON object;
- types.py: requests (pydantic) read into Settings by options.py's checks;
- completions.py: a completion request queued as a Job and answered whole or as server-sent events;
- wire.py: the engine's events as OpenAI's JSON;
- worker.py: the one owner of the pair, serving `--slots` generations at once (their rows
  batched) from a FIFO;
- errors.py: the one error shape; guard.py: keys, Host and Origin; middleware.py: the guard on
  every request and the log line; metrics.py: /metrics;
- server.py: uvicorn, bounded; static/: the page.

It uses the core only; cli/serve.py gives it a command.
"""
