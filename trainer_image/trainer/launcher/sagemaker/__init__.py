"""SageMaker's side of the launcher: the container conventions read from files (`files`), the training
environment the `sagemaker-training` toolkit would export (`toolkit_env`, a port) and what the toolkit asks
the machine first (`host`)."""
