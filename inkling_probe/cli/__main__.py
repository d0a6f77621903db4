from inkling_probe.cli import main

main()
