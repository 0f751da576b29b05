"""Recipes built on verl. A regular package on purpose: TransferQueue installs a top-level ``recipe``
namespace folder, and a regular package always wins over a namespace portion."""
