"""The sim side of one episode: the sim client's loop, action handling, video, episode records and
the benchmark adapters (`bench/`). With `model/` and `wire/` this is the code the contract hashes."""
