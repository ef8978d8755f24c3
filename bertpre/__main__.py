"""`python -m bertpre` runs the command line."""
from bertpre.cli import main

if __name__ == "__main__":
    main()
