"""Hello world for the cold-start comparison (benchmark 7): functions-framework and nothing else."""

import functions_framework


@functions_framework.http
def hello(request):
    return "hello"
