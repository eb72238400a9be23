from mqtool.cli import main

main()
