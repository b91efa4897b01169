from airig.launcher.cli.app import main

main()
