"""The Docker backend, one module per concern (lowest first).

``engine`` (the adapter: the one importer of the docker SDK and holder of its client; refs out, its errors mapped inside),
``images`` (building the two images), ``volumes`` and ``enginedisk`` (where a run's files live for
the engine), ``simnet`` (the simulated internet's containers), ``lease`` and ``hub`` (one internet
shared by every grader on the machine), ``resources`` (what one run made), ``sharing`` (the one
interface to a shared internet: the backend's own or the hub's), ``replay`` (the user's next
session), ``run`` (one run of one plan) and ``backend`` (the backend object, and the sweep).
"""
