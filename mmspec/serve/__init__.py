"""`mmspec serve`: an HTTP service over one pipeline, fixed at start-up. The modules build on one another in this order:
limits and schemas (what a request may be), media (pictures and clips in and out of JSON), tickets and backend (the
bounded queue and the worker slots that call the pipeline), metrics (Prometheus text), doors (a request -> a pipeline
call -> an answer, per kind), app (the FastAPI app), server (uvicorn, the SIGTERM drain) and ray (the same app as Ray
Serve replicas). Nothing is imported here: `import mmspec.serve` stays free of FastAPI."""
