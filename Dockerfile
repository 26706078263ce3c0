# One image for every role: `platform serve --role <role>` picks what runs.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src ./src
COPY test ./test
COPY bench ./bench
COPY bin ./bin
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/package.json ./package.json
COPY bin ./bin
EXPOSE 9000 9001 9002 9003
ENTRYPOINT ["node", "bin/platform"]
CMD ["up", "--host", "0.0.0.0"]
