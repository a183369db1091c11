from dreamd.cli.commands import main

main()
