"""The Hugging Face policy, shared by the embedded engine, the verl engine's CPU rollout server and the commands:
model paths and loading (the packaged SmolLM2, LoRA, vision-language models and their processor), batched
generation, token sequences with the shared prompt prefix, image inputs, and the tiny random models of the tests."""
