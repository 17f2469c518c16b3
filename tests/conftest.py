pytest_plugins = [
    "tests.emulator_fixtures",
    "tests.postgres_fixtures",
    "tests.scheduling",
    "tests.module_times",
    "tests.coverage_pause",
]
