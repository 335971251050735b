.PHONY: dev down status test lint crds images

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

# Builds the hangar and hangar-sandbox images with buildah (no Docker engine; as root) into OCI archives in
# build/images/, and smoke-tests each inside the image. Not part of `make test`: ~15 minutes cold.
images:
	bash images/build.sh
