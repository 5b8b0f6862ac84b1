"""What every process of the harness shares, whatever stage it runs: the one error path of a command
(`failures`) and stop signals that only raise a flag (`stopsignals`).

It imports nothing of the harness, so every stage, configuration included, can use it.
"""
