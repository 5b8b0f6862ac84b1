"""One worker: a persistent model server child, then claim a unit -> run its sim child over the
unit's missing seeds -> release, until the queue is empty. The children die with their worker."""
