from dreamd.cli import main

main()
