"""``python -m fairgpu`` runs the command line."""

from fairgpu.cli import main

main()
