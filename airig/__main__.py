from airig.cli import main

main()
