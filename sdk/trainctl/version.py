"""The one place the project's version and the trainer image it publishes are written."""

__version__ = "0.1.0"
IMAGE_REPOSITORY = "ghcr.io/trainctl/trainer"
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"
