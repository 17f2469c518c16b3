from tests.props import load_profile

pytest_plugins = [
    "tests.emulator_fixtures",
    "tests.postgres_fixtures",
    "tests.scheduling",
    "tests.module_times",
    "tests.coverage_pause",
    "tests.mutation_baseline",
]

load_profile()  # `test.sh --fast`: every property on a quarter of its examples (tests/props.py)
