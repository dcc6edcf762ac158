package main

func init() { register(opsCommand("dlq")) }
