package main

func init() { register(opsCommand("replay")) }
