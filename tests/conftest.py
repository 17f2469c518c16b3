pytest_plugins = ["tests.emulator_fixtures"]
