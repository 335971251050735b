.PHONY: dev down status test lint crds

# Sets up (venv, control-plane binaries, agent CLIs) and starts a whole hangar on this machine.
dev:
	bash tools/bootstrap.sh
	.venv/bin/hangar dev up

down:
	.venv/bin/hangar dev down

status:
	.venv/bin/hangar dev status

# Sets up what the tests need and runs lint, types and every test.
test:
	bash tools/test.sh

crds:
	.venv/bin/hangar crds
